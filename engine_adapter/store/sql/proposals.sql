-- insert_proposal --
-- Through the checked door of migration 047 (as are the writes below).
select * from threadline.insert_proposal(%(row)s)

-- lock_proposal --
select (l.proposal).*, l.expired from threadline.lock_proposal(%(id)s) l

-- get_proposal --
select *, expires_at <= now() as expired from threadline.proposals where id = %(id)s

-- list_proposals --
select id, workflow, summary, risk, status, proposed_by, created_at, expires_at, reviewed_by
  from threadline.proposals
 where %(workflow)s::text is null or workflow = %(workflow)s
 order by id desc
 limit 200

-- review_proposal --
select threadline.review_proposal(%(id)s, %(status)s, %(actor)s, %(note)s)

-- set_proposal_status --
select threadline.set_proposal_status(%(id)s, %(status)s)

-- proposal_applied --
select threadline.proposal_applied(%(id)s, %(version)s)
