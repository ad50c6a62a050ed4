"""The small, named part of the runner that a run's steps may use (issue 34).

A run of a job is carried out by three steps, each in its own module: the map queue
(``inflight``), the map and reduce calls (``execute``) and the passages answer
(``retrieve``).  They must not hold the runner itself: the runner owns the jobs, the
user's decisions, the lane and the settling, and a step that could reach any of it
would make the runner's insides everyone's.  What a step may do is exactly this:
ask whether the run was stopped, say how far it got, move the job's state, and end
the run (failed, finished, or given back to the user after a stop).

``JobRunner`` builds one ``RunSteps`` from its own methods and hands it to each step;
a test can build one from plain functions.  Beside the runner's part it carries the three
services a step calls, each named: ``sizing`` (the settings, the model server, the calibration),
``calls`` (every model call) and ``indexer`` (the passages index), and nothing else of
``Services``.
"""

from __future__ import annotations

from typing import Callable

from typing import TYPE_CHECKING

from ..budget import Sizing
from ..work.activity import Activity
from .job import Job, StateMachine

if TYPE_CHECKING:
    from ..retrieval.indexer import Indexer
    from ..work.calls import ModelCalls


class RunSteps:
    """What the steps of a run may ask of the runner: every method takes the job the run is for."""

    def __init__(self, sizing: Sizing, calls: ModelCalls, indexer: Indexer | None, machine: StateMachine, *,
                 transition: Callable[..., Job],
                 stopped: Callable[[Job], bool], progress: Callable[..., None], partial: Callable[[Job, int], None],
                 after_stop: Callable[[Job], None],
                 fail: Callable[..., None], finish: Callable[[Job, str | None, str], None],
                 activity_of: Callable[[Job], Activity | None], writing: Callable[[Job, str], None]):
        self.sizing = sizing        # the settings, the model server and the calibration
        self.calls = calls          # every model call of the run (``work.calls.ModelCalls``)
        self.indexer = indexer      # the passages index's one writer (``retrieval.indexer``)
        self.machine = machine      # the job's saved changes and results (``job.StateMachine``)
        self._transition, self._stopped, self._progress, self._partial = transition, stopped, progress, partial
        self._after_stop, self._fail, self._finish = after_stop, fail, finish
        self._activity_of = activity_of
        self._writing = writing

    def transition(self, job: Job, new_state: str, **changes) -> Job:
        """Move the job to ``new_state`` (checked, saved, and the session given back when it leaves
        the holding states): the one way a step changes the job's state, so it never races a view.
        A job left for the user (interrupted, confirm, failed) tells the card's followers in the same
        step."""
        return self._transition(job, new_state, **changes)

    def stopped(self, job: Job) -> bool:
        """True when the run must end now (a cancel, a discard, or the server shutting down): a step
        asks before each call and after each failure, so a Stop never starts new work."""
        return self._stopped(job)

    def progress(self, job: Job, running: list[int] | None = None, stage: str = "") -> None:
        """Tell the card's followers how far the run got: ``running``, the 0-based chunks whose calls
        are in flight, or ``stage``, what the synthesis or the index build is doing."""
        self._progress(job, running=running, stage=stage)

    def writing(self, job: Job, text: str) -> None:
        """Show the answer being written (the synthesis, the passages answer) as it comes (issue 44)."""
        self._writing(job, text)

    def partial(self, job: Job, index: int) -> None:
        """Tell the followers chunk ``index``'s partial answer was recorded (the card can open it)."""
        self._partial(job, index)

    def after_stop(self, job: Job) -> None:
        """The run saw it was stopped: the job goes where the stop sends it (after a cancel the user
        chooses; after a shutdown it waits for Resume), and the card says so."""
        self._after_stop(job)

    def fail(self, job: Job, message: str, synthesis: str | None = None) -> None:
        """The run cannot finish: the job fails with ``message`` on its card; with ``synthesis``, the
        session's scene records what ran."""
        self._fail(job, message, synthesis=synthesis)

    def finish(self, job: Job, answer: str | None, synthesis: str) -> None:
        """The job is done (or dropped): its outcome goes into the session and the runner forgets it."""
        self._finish(job, answer, synthesis)

    def activity_of(self, job: Job) -> Activity | None:
        """The session's activity the job holds (its calls attach to it, so a Stop cuts them); None
        when the job no longer holds its session (it was stopped)."""
        return self._activity_of(job)
