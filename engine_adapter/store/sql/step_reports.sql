-- step_reports --
-- What a run's bots reported per attempt (each attempt's exit code) and its agents' journals
-- (each tool call's arguments and result): why each step ended as it did. A tool result is cut
-- to its first 4,000 characters here (its full length kept), an entry's data is read no further;
-- a retry note's first line says why its attempt failed.
select step_key, kind, dedupe_key,
       case when kind = 'progress' then split_part(text, E'\n', 1) end as line,
       case when kind = 'agent.tool'
            then jsonb_build_object(
                   'message', jsonb_build_object(
                     'content', left(data -> 'message' ->> 'content', 4000)),
                   'chars', length(data -> 'message' ->> 'content'))
            when kind = 'agent.assistant'
            then jsonb_build_object(
                   'message', jsonb_build_object('tool_calls', data -> 'message' -> 'tool_calls'))
            else jsonb_build_object('attempt', data -> 'attempt', 'exit_code', data -> 'exit_code')
       end as data
  from threadline.thread_entries
 where run_id = %(run_id)s
   and (kind in ('agent.assistant', 'agent.tool')
        or (author_kind = 'bot' and kind in ('progress', 'message') and data ? 'exit_code'))
 order by seq
