"""The connection gate (serving/connection.py): every accepted socket counted, idle ones evicted
oldest first to make room, a new one refused only when every open connection is busy."""
import pytest

from anydev.serving.connection import ConnectionGate


class Conn:
    def __init__(self, name):
        self.name, self.evicted = name, False

    def evict(self):
        self.evicted = True


def gate(cap):
    drops = []
    return ConnectionGate(cap, drops.append), drops


def test_under_the_cap_every_connection_is_admitted_and_counted():
    g, drops = gate(3)
    conns = [Conn(i) for i in range(3)]
    assert all(g.admit(c) for c in conns)
    assert g.open_count == 3 and drops == [] and not any(c.evicted for c in conns)


def test_past_the_cap_the_longest_waiting_connection_makes_room():
    g, drops = gate(2)
    a, b, c = Conn("a"), Conn("b"), Conn("c")
    g.admit(a), g.admit(b)
    assert g.admit(c)
    assert a.evicted and not b.evicted and g.open_count == 2 and drops == ["evicted_idle"]


def test_a_busy_connection_is_never_evicted_and_a_keep_alive_one_waits_at_the_back():
    g, drops = gate(2)
    a, b, c, d = Conn("a"), Conn("b"), Conn("c"), Conn("d")
    g.admit(a), g.admit(b)
    g.busy(a)                   # a request arrives on a
    assert g.admit(c) and b.evicted and not a.evicted
    g.waiting(a)                # a's answer is done: idle again, but newer than c
    assert g.admit(d) and c.evicted and not a.evicted


def test_when_every_connection_is_busy_the_new_one_is_refused():
    g, drops = gate(2)
    a, b = Conn("a"), Conn("b")
    g.admit(a), g.admit(b)
    g.busy(a), g.busy(b)
    assert not g.admit(Conn("c"))
    assert g.open_count == 2 and drops == ["over_cap"] and not (a.evicted or b.evicted)


def test_a_closed_connection_frees_its_place_once():
    g, drops = gate(1)
    a = Conn("a")
    g.admit(a)
    g.closed(a)
    g.closed(a)                 # the close after an eviction or a refusal: no double count
    assert g.open_count == 0 and g.admit(Conn("b")) and not a.evicted and drops == []


def test_an_evicted_connection_closing_later_does_not_free_a_second_place():
    g, drops = gate(1)
    a, b = Conn("a"), Conn("b")
    g.admit(a)
    g.admit(b)                  # evicts a
    g.closed(a)                 # a's connection_lost arrives afterwards
    assert g.open_count == 1
    g.busy(b)
    assert not g.admit(Conn("c"))


def test_a_cap_below_one_is_refused():
    with pytest.raises(ValueError, match="cap must be >= 1"):
        ConnectionGate(0, lambda reason: None)
