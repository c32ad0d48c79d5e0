-- enqueue_notification --
-- One notification in the outbox, once per event, rule and target (migration 044: one whose links
-- decide as an account only to a channel it registered).
select threadline.enqueue_notification(%(run_id)s, %(event)s, %(event_key)s, %(rule)s,
                                       %(channel)s, %(target)s, %(subject)s, %(text)s)

-- gates_waiting --
-- Open gates of runs whose recipe asks to hear of a gate waiting: with the question's age.
select rt.run_id, rt.await_key, rt.recipe -> 'notify' as notify, q.text,
       extract(epoch from now() - q.created_at) as waited_s
  from threadline.run_threads rt
  join threadline.thread_entries q
    on q.run_id = rt.run_id and q.dedupe_key = 'question:' || rt.await_key
 where rt.awaiting and rt.await_kind = 'gate' and rt.state = 'waiting'
   and jsonb_path_exists(rt.recipe, '$.notify[*].when[*] ? (@ == "waiting")')

-- claim_notifications --
-- Due notifications, leased to this notifier for a while (a notifier killed mid-send leaves its
-- lease to expire: the notification goes out again, with the same id).
select * from threadline.claim_notifications(%(lease_s)s, %(limit)s)

-- notification_sent --
-- A delivery made; nothing when the notification was no longer pending.
select id from threadline.notification_done(%(id)s, true, false, null, null)

-- notification_failed --
-- A failed delivery: tried again after a backoff, or given up.
select id from threadline.notification_done(%(id)s, false, %(give_up)s, %(backoff_s)s, %(error)s)

-- gate_still_open --
select exists (select 1 from threadline.run_threads
                where run_id = %(run_id)s and awaiting and await_kind = 'gate'
                  and await_key = %(gate_key)s) as open
