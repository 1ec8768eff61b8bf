"""Maximum flow / minimum cut (Dinic's algorithm) over a small directed graph.

`FlowNetwork` takes named vertices and capacitated edges; `min_cut(source, sink)`
returns the set of vertices on the source side of a minimum cut.
"""

from __future__ import annotations

from collections import deque

INFINITE = float("inf")


class FlowNetwork:
    def __init__(self) -> None:
        self._index: dict[object, int] = {}
        self._heads: list[list[int]] = []
        self._to: list[int] = []
        self._capacity: list[float] = []

    def vertex(self, name) -> int:
        if name not in self._index:
            self._index[name] = len(self._heads)
            self._heads.append([])
        return self._index[name]

    def add_edge(self, start, end, capacity: float) -> None:
        u, v = self.vertex(start), self.vertex(end)
        # Edges are stored in pairs: edge e and its residual twin e ^ 1.
        self._heads[u].append(len(self._to))
        self._to.append(v)
        self._capacity.append(capacity)
        self._heads[v].append(len(self._to))
        self._to.append(u)
        self._capacity.append(0.0)

    def _levels(self, source: int, sink: int) -> list[int] | None:
        level = [-1] * len(self._heads)
        level[source] = 0
        queue = deque([source])
        while queue:
            u = queue.popleft()
            for edge in self._heads[u]:
                v = self._to[edge]
                if level[v] < 0 and self._capacity[edge] > 0:
                    level[v] = level[u] + 1
                    queue.append(v)
        return level if level[sink] >= 0 else None

    def _augment(self, source: int, sink: int, level, cursor) -> float:
        """Push flow along one shortest augmenting path; iterative so deep graphs fit."""
        capacity, to, heads = self._capacity, self._to, self._heads
        path: list[int] = []
        u = source
        while u != sink:
            edges = heads[u]
            while cursor[u] < len(edges):
                edge = edges[cursor[u]]
                if capacity[edge] > 0 and level[to[edge]] == level[u] + 1:
                    break
                cursor[u] += 1
            if cursor[u] < len(edges):
                path.append(edges[cursor[u]])
                u = to[path[-1]]
                continue
            if not path:
                return 0.0
            level[u] = -1  # dead end: never enter it again in this phase
            u = to[path.pop() ^ 1]
            cursor[u] += 1
        flow = min(capacity[edge] for edge in path)
        for edge in path:
            capacity[edge] -= flow
            capacity[edge ^ 1] += flow
        return flow

    def max_flow(self, source, sink) -> float:
        s, t = self.vertex(source), self.vertex(sink)
        total = 0.0
        while (level := self._levels(s, t)) is not None:
            cursor = [0] * len(self._heads)
            while (flow := self._augment(s, t, level, cursor)) > 0:
                if flow == INFINITE:
                    raise ValueError("infinite flow: no finite cut separates source and sink")
                total += flow
        return total

    def min_cut(self, source, sink) -> set:
        """Vertex names reachable from `source` in the residual graph after max flow."""
        self.max_flow(source, sink)
        start = self.vertex(source)
        seen = {start}
        queue = deque([start])
        while queue:
            u = queue.popleft()
            for edge in self._heads[u]:
                v = self._to[edge]
                if v not in seen and self._capacity[edge] > 0:
                    seen.add(v)
                    queue.append(v)
        names = {index: name for name, index in self._index.items()}
        return {names[i] for i in seen}
