"""hatp: the Human-Agent Transaction Protocol.

An AI agent's actions on several systems as one all-or-nothing transaction,
in which a human's approval is a signed vote; evidence that anyone can
verify offline.
"""

from hatp.errors import HatpError
from hatp.version import PROTOCOL_VERSION

__version__ = "0.1.0"

__all__ = ["PROTOCOL_VERSION", "HatpError", "__version__"]
