"""pylmq.cli: the release's commands and the node as they run it.

``python -m pylmq.cli.lmq`` (``bin/lmq``: start, stop, restart, ping, foreground, console, pid),
``python -m pylmq.cli.admin`` (``bin/lmq-admin``: status, stats, join, leave); :mod:`service`
assembles a node from :class:`~pylmq.config.Settings`; :mod:`console` is ``lmq_console``, what
the node answers the admin tools over Erlang distribution; :mod:`maint` is the short-lived node
the tools reach it with. ``make rel`` (``rel/build.sh``) writes the launchers.
"""
