-- A recipe keeps the text its author wrote (comments, key order, durations as typed) beside the
-- parsed recipe, so the editor, `recipe show` and the versions' diffs show it as written. Null
-- where there is none: a version applied as a document, or before texts were kept; such a version
-- reads as the recipe rendered. A proposal keeps the text it proposes, which becomes its
-- version's. The hash stays the parsed recipe's: a text alone never makes two recipes differ.
-- Both tables are granted whole (008, 018), so the new columns need no grant of their own.
alter table threadline.workflow_versions add column source_text text;
alter table threadline.proposals add column proposed_text text;
