"""Markdown table of a gpu_bench.py --json file: python bench/gpu_table.py bench.jsonl"""

import json
import sys


def cell(value, spec):
    return "-" if value is None else format(value, spec)


def main(path: str) -> None:
    rows = [json.loads(line) for line in open(path)]
    print("| workload | eager ms | torch.compile ms | tensorjit ms | vs eager | vs torch.compile "
          "| cold s torch.compile | cold s tensorjit | % copy torch.compile | % copy tensorjit | rel. error tensorjit |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        eager, tc, tj = row.get("eager_ms"), row.get("torch_compile_ms"), row.get("tensorjit_ms")
        print(f"| {row['workload']} | {cell(eager, '.3f')} | {cell(tc, '.3f')} | {cell(tj, '.3f')} "
              f"| {cell(eager / tj if eager and tj else None, '.2f')} | {cell(tc / tj if tc and tj else None, '.2f')} "
              f"| {cell(row.get('torch_compile_compile_s'), '.1f')} | {cell(row.get('tensorjit_compile_s'), '.1f')} "
              f"| {cell(row.get('torch_compile_copy_pct'), '.0f')} | {cell(row.get('tensorjit_copy_pct'), '.0f')} "
              f"| {cell(row.get('tensorjit_error_vs_eager'), '.1e')} |")
    if rows and "copy_gbs" in rows[0]:
        print(f"\nDevice-to-device copy: {rows[0]['copy_gbs']:.0f} GB/s (bytes read + written).")


if __name__ == "__main__":
    main(sys.argv[1])
