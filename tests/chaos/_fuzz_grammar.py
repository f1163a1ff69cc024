"""A grammar of valid and near-valid event records (key bytes, value bytes) for one model,
shared by the event-path fuzz tests (``test_event_fuzz.py``).

Everything is a plain function of a ``random.Random``: the property test hands in
hypothesis' ``st.randoms()`` (derandomized, shrinkable), the broker test a seeded
``random.Random``. Bulky content (long vectors, random bytes, deep nesting) is built from
one drawn seed, so an example stays a few hundred draws.

Each record carries a ``verdict``:

* ``VALID``: certainly valid (moderate finite values, the right dimension, a label of the
  model's task, a fresh id): it must be learned;
* ``INVALID``: certainly not an applicable event (a wrong type, dimension or task, NaN, a
  number beyond the float range, a missing field, a key that is not the model...): it must
  be refused (dead-lettered) and never learned;
* ``EITHER``: may be learned or refused (edge floats, duplicate JSON keys, extra fields,
  huge-but-finite numbers): whichever happens, it must leave no trace when refused.

Independently of the verdict, an example or register event that decodes for the model and
whose id is still in the model's seen-id window is a duplicate (dropped, not learned).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

import learners

VALID, INVALID, EITHER = "valid", "invalid", "either"

#: finite floats at the edges of the float64 range (and the values that break squares)
EDGE = (
    1.7e308,
    -1.7e308,
    1.7976931348623157e308,
    1e308,
    5e-324,
    -5e-324,
    2.2250738585072014e-308,
    -0.0,
    1e300,
    -1e300,
    1e-300,
    -1e-300,
    1.4e154,
    1e150,
    -1e150,
    1.0000000000000002e150,
)
#: literal JSON text that is not a finite number
NON_FINITE = ("NaN", "Infinity", "-Infinity", "1e999", "-1e999")
UNICODE_BITS = ("é", "\u00a0", "🙂", "\u202e", "\ufeff", "\t", "\n", "\x00", "\x7f", "\u2028", "漢")
#: labels no task accepts as such (a classifier takes -1/+1, 0/1 and booleans)
NOT_A_CLASS = (0.5, 2, -3, 1.5, -0.5, 7, 1e150, -1e308, 10**20, 1e-300)
NOT_A_REAL = (True, False, "1.5", [1.0], {"v": 1}, None)


class Raw(str):
    """Literal JSON text (NaN, an integer beyond Python's 4,300-digit str limit, ...)."""


@dataclass(frozen=True)
class Obj:
    """A JSON object as ordered pairs, so a key may appear twice."""

    pairs: tuple[tuple[str, Any], ...]


def dumps(v: Any, ascii_only: bool = True) -> str:
    """JSON text of ``v`` (``Raw`` verbatim, ``Obj`` pairs in order, floats as ``repr``)."""
    if isinstance(v, Raw):
        return str(v)
    if isinstance(v, Obj):
        return (
            "{"
            + ",".join(f"{dumps(k, ascii_only)}:{dumps(x, ascii_only)}" for k, x in v.pairs)
            + "}"
        )
    if isinstance(v, dict):
        return dumps(Obj(tuple(v.items())), ascii_only)
    if isinstance(v, list | tuple):
        return "[" + ",".join(dumps(x, ascii_only) for x in v) + "]"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=ascii_only)
    return json.dumps(v)  # bool, None, int, float (repr; inf/nan as Infinity/NaN)


def to_bytes(v: Any, ascii_only: bool = True) -> bytes:
    # a lone surrogate written raw (ascii_only False) becomes invalid UTF-8 on purpose
    return dumps(v, ascii_only).encode("utf-8", "surrogatepass")


@dataclass(frozen=True)
class Target:
    """The model a stream is for: its spec and the labels its task certainly takes."""

    model: str
    kind: str
    dim: int
    params: dict[str, Any]
    task: str
    labels: tuple[Any, ...]  # classification: the kind's own labels (_test_stream); () else
    transductive: bool  # labels need a registered block (a ``register`` event first)
    block: tuple[tuple[float, ...], ...] = ()  # the rows the opening register event holds

    @property
    def spec(self) -> dict[str, Any]:
        return {
            "id": self.model,
            "kind": self.kind,
            "dim": self.dim,
            "params": dict(self.params),
            "features": self.features,
        }

    @property
    def features(self) -> list[str]:
        """Its feature names: ``x`` may be an object (docs/events.md §1)."""
        return [f"f{i}" for i in range(self.dim)]


def target(kind: str, model: str, dim: int, *, block_rows: int = 0, seed: int = 0) -> Target:
    """A target for ``kind`` with its first ``_test_params()``; a transductive kind gets a
    block of ``block_rows`` distinct moderate rows (one per event that may label it)."""
    cls = learners.REGISTRY[kind]
    labels: tuple[Any, ...] = ()
    if cls.task != "regression":
        seen = set(cls._test_stream(dim, 64, seed)[1])
        labels = tuple(sorted(seen, key=repr))
    transductive = callable(getattr(cls, "register", None))
    block: tuple[tuple[float, ...], ...] = ()
    if transductive:
        rng = random.Random(seed)
        block = tuple(
            tuple(round(rng.gauss(0.0, 1.0), 4) for _ in range(dim)) for _ in range(block_rows)
        )
    return Target(
        model, kind, dim, dict(cls._test_params()[0]), cls.task, labels, transductive, block
    )


@dataclass(frozen=True)
class Record:
    key: bytes | None
    value: bytes | None
    category: str
    verdict: str
    model: str  # the target whose stream made it (its partition key)

    def show(self) -> str:
        v = (
            self.value
            if self.value is None or len(self.value) <= 300
            else self.value[:300] + b"..."
        )
        return f"{self.category} [{self.verdict}] key={self.key!r} value={v!r}"


@dataclass
class Grammar:
    """Records for one target; ``opening()`` first (a transductive block), then
    ``record()`` as often as wanted."""

    rng: random.Random
    t: Target
    others: tuple[str, ...] = ("fz-nobody",)  # model ids that are not this target
    n: int = 0
    sent: list[Record] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    next_row: int = 0
    trusted: bool = True  # no block of other rows may have been registered since the opening

    # ---- building blocks ------------------------------------------------------------------
    def fresh_id(self) -> str:
        self.n += 1
        event_id = f"{self.t.model}-e{self.n}"
        self.ids.append(event_id)
        return event_id

    def moderate(self) -> float | int:
        r = self.rng
        if r.random() < 0.15:
            return r.randrange(-3, 4)
        # not gauss(): hypothesis' Random may answer it with any float at all
        return round((r.random() * 2.0 - 1.0) * 2.5, r.randrange(0, 7))

    def good_x(self) -> tuple[list[Any], bool]:
        """A vector of the right dimension and whether a label for it is learnable for
        certain (for a transductive kind: an unused row of the trusted block)."""
        if self.t.transductive:
            if self.trusted and self.next_row < len(self.t.block):
                self.next_row += 1
                return list(self.t.block[self.next_row - 1]), True
            return [self.moderate() for _ in range(self.t.dim)], False
        return [self.moderate() for _ in range(self.t.dim)], True

    def named(self, x: list[Any]) -> dict[str, Any]:
        """``x`` as an object, in a random order, some zeros left out (missing names are 0)."""
        r = self.rng
        pairs = [(n, v) for n, v in zip(self.t.features, x, strict=True) if v or r.random() < 0.5]
        r.shuffle(pairs)
        return dict(pairs)

    def good_y(self) -> Any:
        if self.t.labels:
            return self.rng.choice(self.t.labels)
        return self.moderate() * 3

    def good(self, named: bool = True) -> tuple[dict[str, Any], bool]:
        """A valid example (as a dict, in a random key order) and whether it is certain;
        ``x`` is a list unless ``named`` (then sometimes an object)."""
        x, sure = self.good_x()
        body: dict[str, Any] = {
            "model": self.t.model,
            "id": self.fresh_id(),
            "x": x,
            "y": self.good_y(),
        }
        r = self.rng
        if named and r.random() < 0.2:
            body["x"] = self.named(x)
        if r.random() < 0.3:
            body["ts"] = round(1.7e9 + r.random() * 1e6, 3)
        if r.random() < 0.2:
            body["hint"] = self.moderate()
        if r.random() < 0.1:
            body["prediction_id"] = f"p{self.n}"  # documented, informational
        items = list(body.items())
        r.shuffle(items)
        return dict(items), sure

    def rec(
        self, body: Any, category: str, verdict: str, *, key: Any = ..., ascii_only: bool = True
    ) -> Record:
        value = body if isinstance(body, bytes) or body is None else to_bytes(body, ascii_only)
        k = self.t.model.encode() if key is ... else key
        out = Record(k, value, category, verdict, self.t.model)
        self.sent.append(out)
        return out

    def sub(self) -> random.Random:
        """A generator for bulky content, from one draw."""
        return random.Random(self.rng.getrandbits(32))

    # ---- the grammar ----------------------------------------------------------------------
    def opening(self) -> list[Record]:
        if not self.t.transductive or not self.t.block:
            return []
        body = {
            "model": self.t.model,
            "id": self.fresh_id(),
            "type": "register",
            "vectors": self.t.block,
        }
        return [self.rec(body, "register-block", VALID)]

    def record(self) -> Record:
        cats = CATEGORIES
        weights = [w for _, w in cats]
        name = self.rng.choices([c for c, _ in cats], weights)[0]
        return getattr(self, f"_{name.replace('-', '_')}")()

    def _valid(self) -> Record:
        body, sure = self.good()
        return self.rec(body, "valid", VALID if sure else EITHER)

    def _valid_unicode_id(self) -> Record:
        body, sure = self.good()
        r = self.rng
        bits = "".join(r.choice(UNICODE_BITS) for _ in range(r.randrange(1, 4)))
        body["id"] = self.ids[-1] = body["id"] + bits if r.random() < 0.5 else bits + body["id"]
        return self.rec(
            body, "valid-unicode-id", VALID if sure else EITHER, ascii_only=r.random() < 0.5
        )

    def _id_length(self) -> Record:
        body, sure = self.good()
        r = self.rng
        length = r.choice([256, 257, 1000])
        fill = r.choice(["i", "🙂", "é"])
        event_id = (body["id"] + fill * length)[:length]
        body["id"] = self.ids[-1] = event_id
        return self.rec(
            body, f"id-{length}-chars", (VALID if sure else EITHER) if length <= 256 else INVALID
        )

    def _named(self) -> Record:
        """An object ``x``: valid, or naming a feature the model lacks, or a value that is
        not a number."""
        body, sure = self.good()
        r = self.rng
        x = body["x"] if isinstance(body["x"], dict) else self.named(body["x"])
        how = r.choice(["valid", "unknown", "not-a-number"])
        if how == "unknown":
            x[r.choice(["zz", "f" + str(self.t.dim), "F0", ""])] = self.moderate()
        elif how == "not-a-number":
            x[r.choice(self.t.features)] = r.choice(["1", True, None, [1.0], {"v": 1}])
        body["x"] = x
        verdict = (VALID if sure else EITHER) if how == "valid" else INVALID
        return self.rec(body, f"named-{how}", verdict)

    def _found1(self) -> Record:
        """The issue's record: finite, but every square overflows."""
        x, _ = self.good_x()
        y = 1e308 if not self.t.labels else self.good_y()
        body = {"model": self.t.model, "id": self.fresh_id(), "x": [1e308] * len(x), "y": y}
        return self.rec(body, "found-1", EITHER)

    def _edge_x(self) -> Record:
        body, _ = self.good(named=False)  # a list: one of its values is replaced
        r = self.rng
        x = [r.choice(EDGE) if r.random() < 0.6 else r.choice((1, 1.0, -1, 0)) for _ in body["x"]]
        x[r.randrange(len(x))] = r.choice(EDGE)
        body["x"] = x
        return self.rec(body, "edge-x", EITHER)

    def _edge_y(self) -> Record:
        body, _ = self.good()
        r = self.rng
        if self.t.labels:
            body["y"] = r.choice(NOT_A_CLASS + EDGE[:7])
            return self.rec(body, "edge-label", INVALID if body["y"] not in (0, 1, -1) else EITHER)
        body["y"] = r.choice(EDGE)
        return self.rec(body, "edge-y", EITHER)

    def _edge_ts_hint(self) -> Record:
        body, _ = self.good()
        body[self.rng.choice(["ts", "hint"])] = self.rng.choice(EDGE)
        return self.rec(body, "edge-ts-hint", EITHER)

    def _huge_int(self) -> Record:
        """An integer beyond int64, beyond the float range, or beyond 4,300 digits."""
        body, _ = self.good(named=False)  # a list: one of its values is replaced
        r = self.rng
        size = r.choice(["int64", "float", "digits"])
        if size == "int64":
            big: Any = r.choice([2**63, 2**64 + 1, 10**19, 10**40, 10**150, 10**300, -(10**200)])
        elif size == "float":
            big = r.choice([10**309, -(10**309), 10**400, 10**4000])
        else:
            big = Raw(r.choice(["", "-"]) + "1" + "0" * r.randrange(4300, 6000))
        where = r.choice(["x", "y", "ts", "hint", "extra"])
        if where == "x":
            body["x"][r.randrange(len(body["x"]))] = big
        elif where == "extra":
            body["count"] = big
        else:
            body[where] = big
        if size == "digits":
            verdict = INVALID  # json refuses to read such an integer anywhere
        elif size == "float":
            verdict = EITHER if where == "extra" else INVALID
        else:
            verdict = INVALID if where == "y" and self.t.labels else EITHER
        return self.rec(body, f"huge-int-{size}-in-{where}", verdict)

    def _long(self) -> Record:
        body, _ = self.good()
        r, s = self.rng, self.sub()
        what = r.choice(["x", "vectors", "extra-string", "many-keys"])
        if what == "x":
            body["x"] = [round(s.random(), 3) for _ in range(r.choice([1_000, 10_000, 30_000]))]
            return self.rec(body, "long-x", INVALID)
        if what == "vectors":
            rows = [[round(s.random(), 3)] * (self.t.dim + 1) for _ in range(r.choice([10, 2000]))]
            reg = {"model": self.t.model, "id": body["id"], "type": "register", "vectors": rows}
            return self.rec(reg, "long-vectors-wrong-dim", INVALID)
        if what == "extra-string":
            body["note"] = "".join(s.choice("ab🙂\x00\n") for _ in range(r.choice([1_000, 50_000])))
            return self.rec(body, "long-extra-string", EITHER)
        for i in range(r.choice([100, 3000])):
            body[f"k{i}"] = i
        return self.rec(body, "many-keys", EITHER)

    def _deep(self) -> Record:
        body, _ = self.good()
        r = self.rng
        depth = r.choice([10, 200, 900, 1100, 5000, 100_000])
        nest = Raw("[" * depth + "1" + "]" * depth)
        where = r.choice(["value", "x", "y", "extra", "model"])
        if where == "value":
            return self.rec(Raw("[" * depth), "deep-value", INVALID)
        body[where] = nest
        # nesting in an unknown field is ignored once read; past ~1,000 levels nothing reads it
        verdict = EITHER if where == "extra" and depth < 5000 else INVALID
        return self.rec(body, f"deep-{where}", verdict)

    def _wrong_type(self) -> Record:
        body, _ = self.good()
        r = self.rng
        bad: dict[str, tuple[Any, ...]] = {
            "model": (1, 1.5, True, [self.t.model], {"id": self.t.model}, ""),
            "id": (1, 1.5, True, [1], {}, ""),
            "x": (  # ({} is x as an object naming no feature: the zero vector, valid)
                "abc",
                1,
                {"f0": "1"},
                [],
                [[1.0] * self.t.dim],
                [True] * self.t.dim,
                ["1"] * self.t.dim,
                [None] * self.t.dim,
            ),
            "y": ("1", [1], {"y": 1}),
            "ts": ("now", True, [1], {}),
            "hint": ("0.5", False, [0.5]),
            "type": (1, "", "example", "Register", ["register"], {}, True),
        }
        name = r.choice(sorted(bad))
        body[name] = r.choice(bad[name])
        return self.rec(body, f"wrong-type-{name}", INVALID)

    def _wrong_task(self) -> Record:
        body, _ = self.good()
        label = self.rng.choice(NOT_A_CLASS if self.t.labels else NOT_A_REAL)
        if self.t.labels and None in self.t.labels and label is None:
            label = 2
        body["y"] = label
        return self.rec(body, "wrong-task-label", INVALID)

    def _wrong_dim(self) -> Record:
        body, _ = self.good()
        d = self.t.dim + self.rng.choice([-2, -1, 1, 2, 7])
        body["x"] = [self.moderate() for _ in range(max(d, 0))]
        return self.rec(body, "wrong-dim", INVALID)

    def _non_finite(self) -> Record:
        body, _ = self.good(named=False)  # a list: one of its values is replaced
        r = self.rng
        lit = Raw(r.choice(NON_FINITE))
        where = r.choice(["x", "y", "ts", "hint", "vectors", "extra"])
        if where == "x":
            body["x"][r.randrange(len(body["x"]))] = lit
        elif where == "vectors":
            row: list[Any] = [self.moderate() for _ in range(self.t.dim)]
            row[0] = lit
            body = {"model": self.t.model, "id": body["id"], "type": "register", "vectors": [row]}
        elif where == "extra":
            body["score"] = lit
        else:
            body[where] = lit
        return self.rec(body, f"non-finite-{where}", EITHER if where == "extra" else INVALID)

    def _missing(self) -> Record:
        body, _ = self.good()
        name = self.rng.choice(["model", "id", "x", "y"])
        del body[name]
        verdict = EITHER if name == "y" and None in self.t.labels else INVALID
        return self.rec(body, f"missing-{name}", verdict)

    def _nulls(self) -> Record:
        body, sure = self.good()
        name = self.rng.choice(["model", "id", "x", "y", "ts", "hint", "type", "vectors"])
        body[name] = None
        if name in ("ts", "hint"):
            verdict = VALID if sure else EITHER  # documented: float or null
        elif name in ("type", "vectors"):
            verdict = EITHER  # an example with an explicit null type / an extra null field
        elif name == "y":
            verdict = EITHER if None in self.t.labels else INVALID
        else:
            verdict = INVALID
        return self.rec(body, f"null-{name}", verdict)

    def _mismatch(self) -> Record:
        body, _ = self.good()
        r = self.rng
        how = r.choice(
            ["other-key", "no-key", "empty-key", "nul-key", "bad-utf8-key", "model-is-other"]
        )
        if how == "model-is-other":
            body["model"] = r.choice(self.others)
            return self.rec(body, "model-is-another", INVALID)
        key = {
            "other-key": r.choice(self.others).encode(),
            "no-key": None,
            "empty-key": b"",
            "nul-key": self.t.model.encode() + b"\x00",
            "bad-utf8-key": b"\xff" + self.t.model.encode(),
        }[how]
        return self.rec(body, f"key-mismatch-{how}", INVALID, key=key)

    def _unicode(self) -> Record:
        """Control characters, non-characters and lone surrogates in the model, id or key."""
        body, _ = self.good()
        r = self.rng
        how = r.choice(
            ["surrogate-id", "raw-surrogate-id", "model-control", "non-utf8-value", "bom"]
        )
        if how == "surrogate-id":
            body["id"] = self.ids[-1] = body["id"] + "\ud800"
            return self.rec(body, "lone-surrogate-id", INVALID)
        if how == "raw-surrogate-id":  # the same, unescaped: not UTF-8 any more
            body["id"] = self.ids[-1] = body["id"] + "\udfff"
            return self.rec(body, "raw-surrogate-id", INVALID, ascii_only=False)
        if how == "model-control":
            model = self.t.model + r.choice(["\x00", "\n", "\u202e", "\ud800", "🙂"])
            body["model"] = model
            key = model.encode("utf-8", "surrogatepass") if r.random() < 0.5 else None
            return self.rec(
                body, "model-with-control-char", INVALID, key=key or self.t.model.encode()
            )
        if how == "non-utf8-value":
            raw = to_bytes(body)
            cut = r.randrange(1, len(raw) - 1)
            return self.rec(raw[:cut] + b"\xff\xfe" + raw[cut:], "non-utf8-value", INVALID)
        return self.rec(b"\xef\xbb\xbf" + to_bytes(body), "utf8-bom", EITHER)

    def _dup_keys(self) -> Record:
        """Duplicate JSON keys: the readers keep the last one."""
        body, _ = self.good()
        r = self.rng
        name = r.choice(["x", "y", "id", "model"])
        other = {
            "x": [1.0] * (self.t.dim + 1),
            "y": "label",
            "id": self.fresh_id(),
            "model": r.choice(self.others),
        }[name]
        pairs = list(body.items())
        if r.random() < 0.5:
            pairs.insert(0, (name, other))  # the good value last
            verdict = EITHER
        else:
            pairs.append((name, other))
            verdict = EITHER if name == "id" else INVALID
        return self.rec(Obj(tuple(pairs)), f"duplicate-key-{name}", verdict)

    def _control(self) -> Record:
        """``register`` and ``rollback`` events with bad fields (or on a model that takes
        no block)."""
        r = self.rng
        event_id = self.fresh_id()
        head: dict[str, Any] = {"model": self.t.model, "id": event_id}
        d = self.t.dim
        if r.random() < 0.5:
            rest = [list(row) for row in self.t.block[self.next_row :]]
            if self.t.transductive and self.trusted and rest and r.random() < 0.3:
                # a new block of the rows not labelled yet: later labels still fit it
                body: dict[str, Any] = {**head, "type": "register", "vectors": rest}
                return self.rec(body, "register-rest-of-block", VALID)
            vectors = r.choice(
                [
                    None,
                    [],
                    [[]],
                    [[1.0] * (d + 1)],
                    [1.0] * d,
                    [[[1.0] * d]],
                    [["a"] * d],
                    [[True] * d],
                    "rows",
                    [[1.0] * d, [1.0] * (d + 1)],
                    [[self.moderate() for _ in range(d)] for _ in range(3)],
                    [[r.choice(EDGE) for _ in range(d)] for _ in range(2)],
                ]
            )
            body = {**head, "type": "register"}
            if vectors is not None or r.random() < 0.5:
                body["vectors"] = vectors
            shaped = isinstance(vectors, list) and len(vectors) in (2, 3)
            shaped = shaped and all(isinstance(v, list) and len(v) == d for v in vectors or [])
            shaped = shaped and all(
                isinstance(c, float | int) and not isinstance(c, bool)
                for v in vectors or []
                for c in v
            )
            if shaped and self.t.transductive:
                self.trusted = False  # a new block of other rows: later labels may not fit
                return self.rec(body, "register-new-block", EITHER)
            return self.rec(body, "register-bad", INVALID)
        version = r.choice(
            [0, -1, 1.5, "1", True, None, [1], 10**6 + r.randrange(1000), 10**30, 10**400]
        )
        body = {**head, "type": "rollback", "version": version}
        if version is None and r.random() < 0.5:
            del body["version"]
        if r.random() < 0.2:
            body["ts"] = r.choice(["now", Raw("NaN"), 1.5])
        return self.rec(body, "rollback-bad", INVALID)

    def _dup(self) -> Record:
        """An earlier record again (same bytes), or an earlier id on a new valid body."""
        r = self.rng
        if not self.sent:
            return self._valid()
        if r.random() < 0.5:
            # a register event again (applied once its id left the window) holds every
            # row not labelled yet, or came after trust was lost: labels still fit
            old = r.choice(self.sent[-10:])
            return self.rec(old.value, "resent", EITHER, key=old.key)
        body, _ = self.good()
        body["id"] = r.choice(self.ids[-10:])
        return self.rec(body, "reused-id", EITHER)

    def _garbage(self) -> Record:
        r, s = self.rng, self.sub()
        body, _ = self.good()
        raw = to_bytes(body)
        how = r.choice(["bytes", "truncated", "empty", "tombstone", "not-object", "random-key"])
        if how == "bytes":
            return self.rec(s.randbytes(s.randrange(1, 300)), "random-bytes", INVALID)
        if how == "truncated":
            return self.rec(raw[: r.randrange(1, len(raw) - 1)], "truncated-json", INVALID)
        if how == "empty":
            return self.rec(b"", "empty-value", INVALID)
        if how == "tombstone":
            return self.rec(None, "tombstone", INVALID)
        if how == "not-object":
            return self.rec(
                r.choice([b"[1,2,3]", b"42", b'"str"', b"null", b"true", b"[" + raw + b"]"]),
                "not-an-object",
                INVALID,
            )
        return self.rec(raw, "random-key", INVALID, key=s.randbytes(8))


#: (category, weight): about a third of the records are valid events
CATEGORIES: list[tuple[str, int]] = [
    ("valid", 14),
    ("valid-unicode-id", 2),
    ("named", 2),
    ("id-length", 1),
    ("found1", 1),
    ("edge-x", 3),
    ("edge-y", 2),
    ("edge-ts-hint", 1),
    ("huge-int", 2),
    ("long", 1),
    ("deep", 1),
    ("wrong-type", 3),
    ("wrong-task", 2),
    ("wrong-dim", 2),
    ("non-finite", 2),
    ("missing", 1),
    ("nulls", 2),
    ("mismatch", 2),
    ("unicode", 2),
    ("dup-keys", 2),
    ("control", 2),
    ("dup", 3),
    ("garbage", 2),
]
