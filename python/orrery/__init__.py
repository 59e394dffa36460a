"""Client of orrery's node agent for training loops.

    client = orrery.Client.from_env()
    while not client.done:
        with client.iteration():
            train_step()

Before the block, ``iteration()`` waits for the job's slot (the Shift, Align,
Pace or Pause in force); after it, it reports the iteration's duration. Standard
library only; the PyTorch hook in ``orrery.torch_hook`` imports torch lazily.
"""

from .client import Client, JobEnded, AgentError

__all__ = ["Client", "JobEnded", "AgentError"]
__version__ = "0.1.0"
