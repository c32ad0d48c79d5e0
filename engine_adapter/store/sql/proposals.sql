-- insert_proposal --
insert into threadline.proposals (workflow, base_hash, proposed, proposed_hash, summary, diff,
                                  risk, risk_reasons, proposed_by, proposed_via, run_id,
                                  proposed_text)
values (%(workflow)s, %(base_hash)s, %(proposed)s, %(proposed_hash)s, %(summary)s, %(diff)s,
        %(risk)s, %(risk_reasons)s, %(proposed_by)s, %(proposed_via)s, %(run_id)s,
        %(proposed_text)s)
returning *

-- lock_proposal --
select *, expires_at <= now() as expired from threadline.proposals where id = %(id)s for update

-- get_proposal --
select *, expires_at <= now() as expired from threadline.proposals where id = %(id)s

-- list_proposals --
select id, workflow, summary, risk, status, proposed_by, created_at, expires_at, reviewed_by
  from threadline.proposals
 where %(workflow)s::text is null or workflow = %(workflow)s
 order by id desc
 limit 200

-- review_proposal --
update threadline.proposals
   set status = %(status)s, reviewed_by = %(actor)s, review_note = %(note)s, reviewed_at = now()
 where id = %(id)s

-- set_proposal_status --
update threadline.proposals set status = %(status)s where id = %(id)s

-- proposal_applied --
update threadline.proposals
   set status = 'applied', applied_version = %(version)s, applied_at = now()
 where id = %(id)s
