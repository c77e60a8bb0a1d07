"""The one cache of live backends and its keep/stop/start rule, on fake kinds (no vLLM)."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.backends.live import Kind, Live


@dataclass(eq=False)
class Fake:
    kind: str
    spec: str
    options: dict = field(default_factory=dict)
    same: int = 0
    alive: bool = True


def _kinds(events: list[tuple[str, str, str]]) -> tuple[Kind, Kind]:
    """Two fake kinds logging ``(start | stop, kind, spec)`` to ``events``."""

    def kind(name: str) -> Kind:
        def start(spec: str, same: int, **options) -> Fake:
            events.append(("start", name, spec))
            return Fake(name, spec, options, same)

        def stop(backend: Fake) -> None:
            events.append(("stop", backend.kind, backend.spec))

        return Kind(name, start, stop, running=lambda backend: backend.alive)

    return kind("offline"), kind("server")


def test_kept_backends_are_reused_the_others_stop_first_and_the_first_spec_starts_last():
    events: list[tuple[str, str, str]] = []
    offline, _ = _kinds(events)
    cache = Live()
    (_, fresh), (b, _) = cache.get_all(offline, ("a", "b"))
    assert not fresh and events == [("start", "offline", "b"), ("start", "offline", "a")]
    events.clear()
    got = cache.get_all(offline, ("c", "b"))  # b kept, a stops before c starts
    assert got[1] == (b, True) and not got[0][1]
    assert events == [("stop", "offline", "a"), ("start", "offline", "c")]
    assert cache.launches(offline) == 3
    assert {x.spec for x in cache.backends(offline)} == {"b", "c"}  # a stopped one is gone


def test_a_spec_listed_twice_gets_two_instances():
    events: list[tuple[str, str, str]] = []
    offline, _ = _kinds(events)
    cache = Live()
    (one, _), (two, _) = cache.get_all(offline, ("a", "a"))
    assert one is not two and (one.same, two.same) == (1, 0)  # the first spec starts last
    kept = cache.get_all(offline, ("a",))  # the instance started first stays
    assert kept == [(two, True)] and events[-1] == ("stop", "offline", "a")
    again = cache.get_all(offline, ("a", "a"))
    assert again[0] == (two, True) and again[1][0] is not one and not again[1][1]


def test_asking_for_one_kind_stops_the_other_and_launches_count_per_kind():
    events: list[tuple[str, str, str]] = []
    offline, server = _kinds(events)
    cache = Live()
    cache.get_all(offline, ("a",))
    ((served, _),) = cache.get_all(server, ("a",), log_dir="logs")
    assert served.options == {"log_dir": "logs"}
    assert events[-2:] == [("stop", "offline", "a"), ("start", "server", "a")]
    cache.get_all(offline, ("a",))
    assert events[-2:] == [("stop", "server", "a"), ("start", "offline", "a")]
    assert (cache.launches(offline), cache.launches(server)) == (2, 1)


def test_a_dead_backend_is_dropped_and_started_again():
    events: list[tuple[str, str, str]] = []
    _, server = _kinds(events)
    cache = Live()
    ((first, _),) = cache.get_all(server, ("a",))
    first.alive = False
    ((second, reused),) = cache.get_all(server, ("a",))
    assert second is not first and not reused and second.same == 0
    assert events == [("start", "server", "a"), ("stop", "server", "a"), ("start", "server", "a")]


def test_clear_stops_everything_or_one_kind():
    events: list[tuple[str, str, str]] = []
    offline, server = _kinds(events)
    cache = Live()
    cache.get_all(server, ("s",))
    cache.clear(server)
    assert events[-1] == ("stop", "server", "s")
    cache.get_all(offline, ("a", "b"))
    events.clear()
    cache.clear()
    assert sorted(events) == [("stop", "offline", "a"), ("stop", "offline", "b")]
    assert cache.get_all(offline, ("a",))[0][1] is False  # nothing was left to reuse
