"""Load against a running detect-serve (``detect-bench http``): closed-loop HTTP clients, the open loop
(Poisson arrivals timed from their scheduled send), the wrk client, and the server's CPU and metrics read
around a run. Imports no torch: runs from the serve-only install."""
