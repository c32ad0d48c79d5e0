-- How each bot process runs steps (sandboxed, as the step user, or unsandboxed), in words, so
-- `health` and the console can say plainly when steps run without a sandbox.
alter table threadline.workers add column sandbox text;
