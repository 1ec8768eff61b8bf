"""Maximum flow / minimum cut (Dinic's algorithm) on a small directed graph of integer capacities."""

from __future__ import annotations

from collections import deque

INFINITY = float("inf")


class FlowGraph:
    def __init__(self) -> None:
        self.index: dict[object, int] = {}
        self.edges: list[list] = []   # [to, capacity, reverse edge index in edges[to]]
        self.adjacency: list[list[int]] = []

    def node(self, key: object) -> int:
        if key not in self.index:
            self.index[key] = len(self.adjacency)
            self.adjacency.append([])
        return self.index[key]

    def add_edge(self, a: object, b: object, capacity: float) -> None:
        u, v = self.node(a), self.node(b)
        self.adjacency[u].append(len(self.edges))
        self.edges.append([v, capacity, len(self.edges) + 1])
        self.adjacency[v].append(len(self.edges))
        self.edges.append([u, 0, len(self.edges) - 1])

    def min_cut(self, source: object, sink: object) -> set[object]:
        """Run max flow; return the keys on the source side of a minimum cut."""
        s, t = self.node(source), self.node(sink)
        while True:
            level = self._levels(s)
            if level[t] < 0:
                break
            pointer = [0] * len(self.adjacency)
            while self._push(s, t, INFINITY, level, pointer) > 0:
                pass
        reachable = self._levels(s)
        keys = {i: k for k, i in self.index.items()}
        return {keys[i] for i, l in enumerate(reachable) if l >= 0}

    def _levels(self, s: int) -> list[int]:
        level = [-1] * len(self.adjacency)
        level[s] = 0
        queue = deque([s])
        while queue:
            u = queue.popleft()
            for e in self.adjacency[u]:
                v, capacity, _ = self.edges[e]
                if capacity > 0 and level[v] < 0:
                    level[v] = level[u] + 1
                    queue.append(v)
        return level

    def _push(self, u: int, t: int, flow: float, level: list[int], pointer: list[int]) -> float:
        # Iterative depth-first search for one augmenting path along the level graph.
        path: list[int] = []
        node = u
        while True:
            if node == t:
                amount = min([flow] + [self.edges[e][1] for e in path])
                for e in path:
                    self.edges[e][1] -= amount
                    self.edges[self.edges[e][2]][1] += amount
                return amount
            advanced = False
            while pointer[node] < len(self.adjacency[node]):
                e = self.adjacency[node][pointer[node]]
                v, capacity, _ = self.edges[e]
                if capacity > 0 and level[v] == level[node] + 1:
                    path.append(e)
                    node = v
                    advanced = True
                    break
                pointer[node] += 1
            if not advanced:
                if not path:
                    return 0
                e = path.pop()
                node = self.edges[self.edges[e][2]][0]
                pointer[node] += 1
