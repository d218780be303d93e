"""The entry points: the ``millrace`` command and what its subcommands run (a server, a cluster node, a
local cluster, the admin commands)."""
