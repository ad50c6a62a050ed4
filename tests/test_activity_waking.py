"""``Activity.waking`` (issue 34): a thread that sleeps on an event of its own (a job waiting for
its file's index, woken by each batch) is woken by a Stop too, without a fake call attached to
the activity and without polling.  A unit test of the mechanism; the retrieval tests run it
through the app (``test_retrieval_answer``: a cancel while indexing)."""

import threading

from app.work.activity import Activities, Activity


def test_a_stop_sets_the_event_of_a_thread_waiting_in_waking_and_attaches_no_call():
    activity = Activity("a1", "s", "analysis", 0)
    event, woke = threading.Event(), threading.Event()

    def waiter():
        with activity.waking(event):
            ready.set()
            if event.wait(30):
                woke.set()

    ready = threading.Event()
    thread = threading.Thread(target=waiter)
    thread.start()
    assert ready.wait(30)
    assert activity.in_flight == 0 and not event.is_set()      # nothing stands among the calls
    activity.stop()
    thread.join(30)
    assert woke.is_set() and not thread.is_alive()


def test_a_stop_before_the_block_sets_the_event_at_once_and_one_after_it_does_not():
    stopped = Activity("a2", "s", "analysis", 0)
    stopped.stop()
    first = threading.Event()
    with stopped.waking(first):
        assert first.is_set()                                  # the Stop came first: no wait at all

    later = Activity("a3", "s", "analysis", 0)
    second = threading.Event()
    with later.waking(second):
        pass
    later.stop()
    assert not second.is_set()                                 # left the block: a Stop no longer touches it


def test_an_ended_activity_says_so_and_closes_its_events():
    activities = Activities()
    activity = activities.begin("s", "reply", 0)
    assert not activity.ended
    activities.end(activity)
    assert activity.ended and activity.wait_ended(0) and activity.events.closed
