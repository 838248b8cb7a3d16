"""One model turn sent: the endpoint called with retries under the model's concurrency limit, the answer or the
error that ended it as a store entry, and the watches that stop a whole run (an endpoint that refuses every request
alike, one that is not there or died).

A cell of the run is a rollout of one or more turns (rfteval.run.rollout); every turn, the first or the seventh,
goes out through `TurnSender.send`, so retries, adaptive concurrency and the stops behave the same for each.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rfteval.providers.base import Generation, GenerationRequest, Provider, ProviderError, exceeds_context
from rfteval.run.store import CellKeys, ResponseEntry, new_response_entry

if TYPE_CHECKING:
    from rfteval.providers.retry import ConnectionWatch, RefusalWatch, RetryPolicy
    from rfteval.run.concurrency import AdaptiveLimiter
    from rfteval.run.monitor import RunMonitor
    from rfteval.run.spec import ModelRun


class FatalRunError(Exception):
    """An endpoint refused the whole run (401/403, unknown model): stop at once, say which model and why."""

    def __init__(self, label: str, model: str, error: ProviderError):
        self.label, self.model, self.error = label, model, error
        super().__init__(f"model {label} ({model}): {error.kind}: {error}")


class RequestRefused(FatalRunError):
    """The endpoint refuses every request of a model alike (a request shape it does not take): exit 2. `turn` is
    the rollout's turn the refused requests were (2 or later: a history the server cannot take, such as an
    assistant message with tool calls and no content); the first turn's refusals say no turn."""

    def __init__(self, label: str, model: str, error: ProviderError, option: str, count: int, turn: int = 1):
        from rfteval.providers.retry import one_line

        self.option, self.count, self.turn = option, count, turn
        super().__init__(label, model, error)
        fix = "" if option == "the request" else f", caused by {option}"
        which = "requests" if turn == 1 else f"turn-{turn} requests (the history after a tool call)"
        self.args = (f"model {label} ({model}): the server refused {count} {which} alike{fix}: "
                     f"{one_line(str(error))}; a re-run after fixing it resumes",)

    def __str__(self) -> str:
        return str(self.args[0])


class ServerGone(Exception):
    """An endpoint that answered before stopped answering (connections refused or reset): the run stops, exit 3."""

    def __init__(self, label: str, model: str, error: ProviderError, failures: int | None, seconds: float = 0.0):
        from rfteval.providers.retry import one_line

        self.label, self.model, self.error = label, model, error
        if failures is None:  # the judge's own watch measured it, and its message says so
            super().__init__(f"judge ({model}): {one_line(str(error), 300)}")
            return
        super().__init__(f"model {label} ({model}): the endpoint stopped answering: {one_line(str(error))} "
                         f"({failures} attempts in a row over {seconds:.1f}s could not connect)")


class ToolsStopped(FatalRunError):
    """The tool box failed as a whole (its sandbox gone, not one call's error, which the model is shown): the run
    stops, exit 2; every stored turn is kept and the same command resumes."""

    def __init__(self, label: str, model: str, reason: str):
        Exception.__init__(self, f"model {label} ({model}): the tools failed: {reason}")
        self.label, self.model, self.error = label, model, ProviderError("bad_request", reason)


def retry_kind(exc: BaseException) -> str:
    """The kind a retried error is counted under on the progress display."""
    return exc.kind if isinstance(exc, ProviderError) else "error"


@dataclass
class TurnSender:
    """Sends the turns of a run's cells: per model label its provider, concurrency limiter and connection watch,
    and a refusal watch per (label, turn), since a server may take every first turn and refuse every second one
    (the history after a tool call): a watch of the first turns alone would never see that."""

    providers: dict[str, Provider]
    limiters: dict[str, AdaptiveLimiter]
    policy: RetryPolicy
    monitor: RunMonitor
    timeout_s: float
    connections: dict[str, ConnectionWatch] = field(default_factory=dict)
    refusals: dict[tuple[str, int], RefusalWatch] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from rfteval.providers.retry import ConnectionWatch

        # one watch per endpoint, shared by the labels it serves (a base and a tuned model on one server): a server
        # that answered one label and then died is gone for the others too (exit 3, resumable), not a server that
        # never answered them (exit 2)
        endpoints: dict[str, ConnectionWatch] = {}
        for label, provider in self.providers.items():
            url = provider.base_url
            watch = ConnectionWatch() if url is None else endpoints.setdefault(url, ConnectionWatch())
            self.connections.setdefault(label, watch)

    def refusal_watch(self, label: str, turn: int) -> RefusalWatch:
        from rfteval.providers.retry import RefusalWatch

        return self.refusals.setdefault((label, turn), RefusalWatch())

    async def send(self, run: ModelRun, request: GenerationRequest, keys: CellKeys, turn: int = 1) -> ResponseEntry:
        """One turn: its answer, or the error it ended in after every retry, as the entry the store keeps under
        `keys`. FatalRunError, RequestRefused and ServerGone stop the run."""
        from rfteval.providers.retry import call_with_retries

        provider = self.providers[run.label]
        attempts = 0
        started = 0.0

        limiter = self.limiters[run.label]
        refusals = self.refusal_watch(run.label, turn)

        async def attempt() -> Generation:
            nonlocal attempts, started
            attempts += 1
            token = await limiter.acquire()
            started = time.perf_counter()
            try:
                gen = await provider.generate(request, self.timeout_s)
            except ProviderError as exc:
                limiter.release(token, exc.kind, exc.rate, exc.retry_after, exc.unavailable)
                if exc.kind == "connection":
                    self._connection_failed(run, exc)
                # a history past the server's context ends that rollout (stop reason `context`), not the run
                if not (turn > 1 and exceeds_context(exc.kind, str(exc))) and refusals.failed(exc):
                    from rfteval.providers.retry import option_of

                    raise RequestRefused(run.label, run.model, exc, option_of(str(exc), provider.request_body(
                        request)), refusals.count, turn) from None
                raise
            except BaseException:
                limiter.release(token, "other")
                raise
            self.connections[run.label].ok()
            refusals.ok()
            before = limiter.current
            limiter.release(token, "ok", gen.rate)
            if limiter.current != before:
                self.monitor.concurrency(run.label, limiter.current)
            return gen

        def on_retry(n: int, exc: BaseException, wait: float) -> None:
            from rfteval.providers.retry import one_line

            self.monitor.retry(run.label, retry_kind(exc), one_line(str(exc), 160))
            self.monitor.concurrency(run.label, limiter.current)

        try:
            gen = await call_with_retries(attempt, self.policy, on_retry)
        except ProviderError as exc:
            if exc.fatal:
                raise FatalRunError(run.label, run.model, exc) from None
            return new_response_entry(**keys, error=(exc.kind, str(exc)), attempts=attempts,
                                      latency_s=round(time.perf_counter() - started, 4))
        except (FatalRunError, ServerGone):
            raise
        except Exception as exc:  # noqa: BLE001 - a provider bug is one failed cell, not a crashed run
            return new_response_entry(**keys, error=("internal", f"{type(exc).__name__}: {exc}"[:500]),
                                      attempts=attempts)
        return new_response_entry(**keys, generation=gen, attempts=attempts,
                                  latency_s=round(time.perf_counter() - started, 4))

    def _connection_failed(self, run: ModelRun, exc: ProviderError) -> None:
        """Stop the run when an endpoint cannot be reached: at once (exit 2) when it never answered, and when it
        answered before but every attempt for a while failed to connect (exit 3: the same command resumes)."""
        watch = self.connections[run.label]
        verdict = watch.failed(exc)
        if verdict == "unreachable":  # never answered: not worth minutes of retries
            raise FatalRunError(run.label, run.model, exc) from None
        if verdict == "gone":
            raise ServerGone(run.label, run.model, exc, watch.count, watch.seconds)
