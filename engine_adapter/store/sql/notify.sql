-- enqueue_notification --
-- One notification in the outbox, once per event, rule and target.
insert into threadline.notifications
  (run_id, event, event_key, rule, channel, target, subject, text)
values (%(run_id)s, %(event)s, %(event_key)s, %(rule)s, %(channel)s, %(target)s, %(subject)s,
        %(text)s)
on conflict (event, event_key, rule, target) do nothing

-- gates_waiting --
-- Open gates of runs whose recipe asks to hear of a gate waiting: with the question's age.
select rt.run_id, rt.await_key, rt.recipe -> 'notify' as notify, q.text,
       extract(epoch from now() - q.created_at) as waited_s
  from threadline.run_threads rt
  join threadline.thread_entries q
    on q.run_id = rt.run_id and q.dedupe_key = 'question:' || rt.await_key
 where rt.awaiting and rt.await_kind = 'gate'
   and jsonb_path_exists(rt.recipe, '$.notify[*].when[*] ? (@ == "waiting")')

-- claim_notifications --
-- Due notifications, leased to this notifier for a while (a notifier killed mid-send leaves its
-- lease to expire: the notification goes out again, with the same id).
update threadline.notifications n
   set attempts = attempts + 1, next_at = now() + make_interval(secs => %(lease_s)s)
 where id in (select id from threadline.notifications
               where status = 'pending' and next_at <= now()
               order by id limit %(limit)s
               for update skip locked)
returning n.id, n.run_id, n.event, n.event_key, n.channel, n.target, n.subject, n.text,
          n.attempts

-- notification_sent --
update threadline.notifications set status = 'sent', sent_at = now(), last_error = null
 where id = %(id)s and status = 'pending'
returning id

-- notification_failed --
-- A failed delivery: tried again after a backoff, or given up.
update threadline.notifications
   set status = case when %(give_up)s then 'failed' else 'pending' end,
       next_at = now() + make_interval(secs => %(backoff_s)s), last_error = %(error)s
 where id = %(id)s and status = 'pending'
returning id

-- gate_still_open --
select exists (select 1 from threadline.run_threads
                where run_id = %(run_id)s and awaiting and await_kind = 'gate'
                  and await_key = %(gate_key)s) as open
