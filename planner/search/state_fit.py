"""Which offload choices of a search's candidates hold their states within the GPU (`StateFit.within`: the state bound
of planner.search.exact's step 2), and whether any member of a family entry of the search (planner.search.exact: the
families sharing a `floor_key`, which wait as one heap entry at their early floor) has states that fit
(`StateFit.fits_none`), asked when the entry first comes up, before its family floor is computed (`StateFit.none_fit`).

`_Search.expand` skips a member (a family's first candidate at the entry's (ep, etp)) none of whose shapes holds an
offload choice within the state bound with the head placed as that shape places it (`StateFit.within`), and queues no
group for it. An entry whose every member is skipped so adds nothing to the search but its held count, so it is settled
here instead, and neither its family floor nor its expansion is computed (torchtitan's DeepSeek-V3 on 2,048 GPUs: 1,637
of the 3,908 entries that came up to their family floor held no member that fits, at 55 µs a family floor).

What the answer reads (the proof is `within`'s key and `expand`'s loop): of each member, its ZeRO stage and replicate
factor; of the entry, its degrees (tp, cp, pp, and so dp), its (ep, etp), whether it recomputes fully (the members'
offload choices and their state bound's key read that) and the head placements of its shapes, which its members share
(one mesh and one micro-batch size, so one shapes list: `space.families` builds one per (pp, micro-batches)).
Entries of other sequence-parallel, micro-batch, recomputation and module choices over the same degrees and ZeRO stages
read the same, so the answer is kept per what it reads.
"""

from __future__ import annotations

from collections.abc import Sequence

from meshcore import ClusterSpec, Offload, Recompute, Schedule, ZeroStage
from planner.search.group_floor import worth_trying
from planner.search.sim_bounds import ReportedBounds
from planner.search.space import Candidate, Family, SearchSpec, offload_options


class StateFit:
    """`within` and `fits_none` for one search's candidates and family entries (module docstring)."""

    def __init__(self, bounds: ReportedBounds, spec: SearchSpec, cluster: ClusterSpec, capacity: float) -> None:
        self.bounds, self.spec, self.capacity = bounds, spec, capacity
        nvme = cluster.host.nvme_gbs > 0
        self.offloads = {(z, alone, full): tuple(offload_options(z, spec, alone, nvme, full))
                         for z in ZeroStage for alone in (False, True) for full in (False, True)}
        self._within: dict[tuple[object, ...], tuple[frozenset[Offload], ...]] = {}
        self._placed: dict[tuple[int, int, int], tuple[bool, ...]] = {}
        self._none: dict[tuple[object, ...], bool] = {}
        self.asked = self.tried = self.settled = 0  # `none_fit`'s tries (`group_floor.worth_trying`)

    def choices(self, c: Candidate) -> tuple[frozenset[Offload], ...]:
        """The offload choices of `c`'s ZeRO stage (`space.offload_options`)."""
        return self.offloads[c.zero, c.dp * c.cp == 1, c.recompute is Recompute.FULL]

    def within(self, c: Candidate, beside: bool | None = None) -> tuple[frozenset[Offload], ...]:
        """The offload choices of `c` (`choices`) whose states fit (`state_bound`, with the head where `beside` puts
        it: c's shapes place it apart), sharing c's floor. When c fits without offloading, all do."""
        bounds, side = self.bounds, self.bounds.beside(c) if beside is None else beside
        key = (c.tp, c.pp, c.dp, c.dp_replicate, c.cp, c.zero, c.ep, c.etp, side,
               c.recompute is Recompute.FULL or not self.spec.checkpoints_only)  # offloading checkpoints needs full
        if key not in self._within:
            if not c.offload and bounds.state_bound(c, side) <= self.capacity:
                self._within[key] = self.choices(c)
            else:
                self._within[key] = tuple(o for o in self.choices(c)
                                          if bounds.state_bound(c.but(offload=o), side) <= self.capacity)
        return self._within[key]

    def none_fit(self, built: Sequence[Family], members: Sequence[tuple[int, int]]) -> bool:
        """`fits_none`, where it is worth trying (`group_floor.worth_trying`, a hit an entry settled): the research
        space's jobs hold almost no such entry, torchtitan's DeepSeek-V3 four in ten. False where not tried: the entry
        then takes its family floor, as every entry did before."""
        self.asked += 1
        if not worth_trying(self.asked, self.tried, self.settled):
            return False
        found = self.fits_none(built, members)
        self.tried += 1
        self.settled += found
        return found

    def fits_none(self, built: Sequence[Family], members: Sequence[tuple[int, int]]) -> bool:
        """Whether `expand` would skip every member (module docstring) of the entry `members`: (family, its (ep, etp)
        choice) pairs indexing `built`, the search's families. The members share one mesh (tp·cp·pp·dp = GPUs:
        `space._meshes`) and micro-batch size, so one shapes list and its head placements."""
        first, shapes, experts, _ = built[members[0][0]]
        ep, etp = experts[members[0][1]]
        sides, firsts = self.sides(first, shapes), [built[f][0] for f, _ in members]
        key = (first.tp, first.cp, first.pp, ep, etp, first.recompute is Recompute.FULL, sides,
               tuple((c.zero, c.dp_replicate) for c in firsts))
        found = self._none.get(key)
        if found is None:  # (the last members, at the higher ZeRO stages, hold the least: they are tried first)
            found = self._none[key] = not any(self.within(c if (ep, etp) == (c.ep, c.etp) else c.but(ep=ep, etp=etp),
                                                          side) for c in reversed(firsts) for side in sides)
        return found

    def sides(self, c: Candidate, shapes: Sequence[tuple[int, Schedule]]) -> frozenset[bool]:
        """The head placements (beside the embedding or not) that `shapes`, c's family's (vpp, schedule) pairs, hold."""
        return frozenset(self.placements(c, shapes))

    def placements(self, c: Candidate, shapes: Sequence[tuple[int, Schedule]]) -> tuple[bool, ...]:
        """The head placement of each of `shapes`, c's family's (vpp, schedule) pairs, in their order: once per (pp,
        dp, mbs), which fixes the shapes (`space.families` builds one list per (pp, micro-batches))."""
        key = (c.pp, c.dp, c.mbs)
        found = self._placed.get(key)
        if found is None:
            found = self._placed[key] = tuple(self.bounds.shape_beside(c, vpp, schedule) for vpp, schedule in shapes)
        return found
