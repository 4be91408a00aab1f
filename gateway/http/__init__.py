"""The HTTP edge of the gateway: the middleware and error shapes (`errors.py`, the one map of errors to statuses),
running a route (`answer.py`), the GET routes, and the guard on request bodies."""
