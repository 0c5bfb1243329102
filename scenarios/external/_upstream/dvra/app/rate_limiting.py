# slowapi is not available here: no route applies a rate limit.
limiter = None
