"""One-time codes for the action buttons of a held-request notification.

Each button's code is an HMAC-SHA256 (the host's secret) over the offer's id,
domain, worktree, the button's decision and the expiry.  The reply carries
only the code: the decision applied is looked up from the offer that made
it, never read from the reply.  An offer is answered once; its other codes
are then spent too.  Its ``more`` code (the "More…" button, when the
choices do not fit on one message) answers nothing: it asks, once, for the
other choices, whose codes the offer already holds.  A code that is unknown, spent or past its expiry is
refused with the reason (the caller logs it), and changes nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass, field

CODE_BYTES = 16             # 128 bits of the HMAC
FORGET_AFTER = 86400.0      # an answered or expired offer is remembered this long (to say "reused"/"expired")
MORE = "more"               # the code that asks for the other choices; it decides nothing


def sign(secret: str, offer_id: str, domain: str, worktree: str | None, decision: str, expires: float) -> str:
    text = "\n".join((offer_id, domain, worktree or "", decision, f"{expires:.3f}"))
    mac = hmac.new(bytes.fromhex(secret), text.encode(), hashlib.sha256).hexdigest()
    return mac[:CODE_BYTES * 2]


@dataclass
class Offer:
    """One notification: the decisions its buttons offer for one domain and worktree."""

    offer_id: str
    domain: str
    worktree: str | None
    expires: float
    codes: dict[str, str] = field(default_factory=dict)      # decision -> code
    answered: bool = False
    more_asked: bool = False    # its "More…" code was used
    ended: bool = False         # the hold ended before its expiry (the proxy said so): expired
    port: int | None = None     # the held request's port: an allow names it when it is not 443/80

    def decision_of(self, code: str) -> str | None:
        for decision, mine in self.codes.items():
            if hmac.compare_digest(mine, code):
                return decision
        return None


class Refusal(Exception):
    """Why a reply was refused: ``unknown``, ``reused`` or ``expired``."""


class Offers:
    """The offers made and not yet forgotten."""

    def __init__(self, secret: str):
        self.secret = secret
        self._offers: list[Offer] = []

    def make(self, domain: str, worktree: str | None, decisions: tuple[str, ...], expires: float) -> Offer:
        offer = Offer(secrets.token_hex(8), domain, worktree, round(expires, 3))
        offer.codes = {d: sign(self.secret, offer.offer_id, domain, worktree, d, offer.expires) for d in decisions}
        self._offers.append(offer)
        return offer

    def live(self, domain: str, worktree: str | None, now: float | None = None) -> Offer | None:
        """The unanswered, unexpired offer for this domain and worktree, if any."""
        now = time.time() if now is None else now
        for offer in self._offers:
            if (offer.domain, offer.worktree) == (domain, worktree) and self._open(offer, now):
                return offer
        return None

    def end(self, domain: str, worktree: str | None) -> None:
        """The hold these offers were for has ended: their codes are expired from now on."""
        for offer in self._offers:
            if (offer.domain, offer.worktree) == (domain, worktree):
                offer.ended = True

    @staticmethod
    def _open(offer: Offer, now: float) -> bool:
        return not offer.answered and not offer.ended and offer.expires > now

    def live_count(self, now: float) -> int:
        return sum(1 for o in self._offers if self._open(o, now))

    def redeem(self, code: str, now: float | None = None) -> tuple[Offer, str]:
        """The offer and decision ``code`` stands for, the offer now answered; Refusal otherwise."""
        now = time.time() if now is None else now
        self._forget(now)
        code = code.strip()
        for offer in self._offers:
            decision = offer.decision_of(code)
            if decision is None:
                continue
            if not hmac.compare_digest(code, sign(self.secret, offer.offer_id, offer.domain, offer.worktree,
                                                  decision, offer.expires)):
                break
            if offer.answered or (decision == MORE and offer.more_asked):
                raise Refusal("reused")
            if offer.ended or offer.expires <= now:
                raise Refusal("expired")
            if decision == MORE:
                offer.more_asked = True
            else:
                offer.answered = True
            return offer, decision
        raise Refusal("unknown")

    def _forget(self, now: float) -> None:
        self._offers = [o for o in self._offers if o.expires + FORGET_AFTER > now]
