"""Pipeline schedules: op orders, closed forms and the discrete-event simulator."""
