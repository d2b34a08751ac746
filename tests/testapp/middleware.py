"""Task middleware the tests configure in JOBQ["MIDDLEWARE"]; each records what it saw in CALLS."""

CALLS: list[tuple[str, object, object]] = []


def outer(job, context, call_next):
    CALLS.append(("outer:before", job.id, context.attempt))
    result = call_next()
    CALLS.append(("outer:after", job.id, result))
    return result


def inner(job, context, call_next):
    CALLS.append(("inner:before", job.id, context.fence))
    try:
        return call_next()
    finally:
        CALLS.append(("inner:after", job.id, None))


async def timing(job, context, call_next):
    CALLS.append(("timing:before", job.id, None))
    result = await call_next()
    CALLS.append(("timing:after", job.id, result))
    return result


def broken(job, context, call_next):
    if job.payload.get("break"):
        raise RuntimeError(f"middleware refused job {job.id}")
    return call_next()


NOT_CALLABLE = 42
