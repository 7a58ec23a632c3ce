"""Errors the controller refuses requests with: Slurm's errno and message.

Which HTTP status an error maps to is the API layer's business; `status` is kept as a hint
for it (and for compatibility with the callers that read it)."""

from __future__ import annotations

# Slurm errno values (slurm/slurm_errno.h, 22.05) for the messages clients see
ESLURM_INVALID_PARTITION_NAME = 2000
ESLURM_ACCESS_DENIED = 2002
ESLURM_JOB_MISSING_REQUIRED_PARTITION_GROUP = 2003
ESLURM_INVALID_NODE_COUNT = 2006
ESLURM_INVALID_NODE_NAME = 2018
ESLURM_INVALID_NODE_STATE = 2028
ESLURM_USER_ID_MISSING = 2010
ESLURM_PATHNAME_TOO_LONG = 2012
ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE = 2014
ESLURM_INVALID_JOB_ID = 2017
ESLURM_DEPENDENCY = 2038
ESLURM_JOB_PENDING = 2024
ESLURM_ALREADY_DONE = 2021
ESLURM_INVALID_FEATURE = 2029
ESLURM_DISABLED = 2037
ESLURM_JOB_HELD = 2042
ESLURM_INVALID_ACCOUNT = 2045
ESLURM_TRANSITION_STATE_NO_UPDATE = 2020
ESLURM_INVALID_TIME_LIMIT = 2051
ESLURM_INVALID_QOS = 2066
ESLURM_INVALID_TASK_MEMORY = 2044  # "Memory required by task is not available"
ESLURM_PARTITION_NOT_AVAIL = 2070
ESLURM_INVALID_GRES = 2072
ESLURM_JOB_NOT_PENDING = 2073
ESLURM_INVALID_ARRAY = 2081
ESLURM_PRIO_RESET_FAIL = 2095

# errno -> the HTTP status the API answers with when the raiser gave none
_STATUS = {ESLURM_ACCESS_DENIED: 403, ESLURM_USER_ID_MISSING: 403, ESLURM_INVALID_JOB_ID: 404}


class SlurmError(Exception):
    """A request the controller refuses, with Slurm's wording and errno."""

    def __init__(self, message: str, errno: int = 0, status: int | None = None,
                 user_msg: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.errno = errno
        self.status = status if status is not None else _STATUS.get(errno, 400)
        self.user_msg = user_msg

    @property
    def text(self) -> str:
        """The message, under the name sacctmgr's callers read (it was `AccountsError.text`)."""
        return self.message


def invalid_job() -> SlurmError:
    return SlurmError("Invalid job id specified", ESLURM_INVALID_JOB_ID, 404)


def access_denied() -> SlurmError:
    return SlurmError("Access/permission denied", ESLURM_ACCESS_DENIED, 403)


def invalid_user() -> SlurmError:
    """Another user's job, for the requests Slurm answers so (hold, release, update)."""
    return SlurmError("Invalid user id", ESLURM_USER_ID_MISSING, 403)
