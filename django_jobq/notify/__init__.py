"""How a worker learns of work: LISTEN (listener), the idle lock that makes an enqueue notify only
while a worker may wait (idle_lock), and in-process wake-ups where the engine has no NOTIFY (wakeup)."""
