"""Where and how a trial runs: the executor seam (`executor`), Ray's executor and its task (`cluster`), the
node a trial goes to (`placement`, `quarantine`), the channel its reports travel on (`trial_channel`) and
the servers a killed driver left behind (`stale_servers`)."""
