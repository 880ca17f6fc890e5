"""Terminal views for `tokenstep lab` and `tokenstep inspect`, drawn with rich."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tokenstep.outputs import CompletionOutput
from tokenstep.sampling.lab import LabResult

HAND_DECIMALS = 3  # the seeds' exercise rounds probabilities to three decimals


def _mark(kept: bool) -> str:
    return "✓" if kept else "·"


def print_lab(result: LabResult, console: Console) -> None:
    """The seeds' exercise as a table, then the hand-arithmetic summary lines."""
    table = Table(title="sampling lab: one step of the sampler, by hand", title_justify="left")
    for name in ("token", "logit", "softmax", "cumulative", "top-k", "top-k renorm", "top-p",
                 "nucleus renorm", f"T={result.temperature:g}", "final"):
        table.add_column(name, justify="left" if name == "token" else "right")
    for row in result.rows:
        table.add_row(row.label, f"{row.logit:g}", f"{row.prob:.3f}", f"{row.cumulative:.3f}",
                      _mark(row.in_top_k), f"{row.top_k_prob:.3f}", _mark(row.in_nucleus),
                      f"{row.nucleus_prob:.3f}", f"{row.temperature_prob:.3f}", f"{row.final_prob:.3f}")
    console.print(table)
    rows = result.rows
    console.print(f"greedy picks: {result.greedy}")
    if result.top_k:
        kept = [r for r in rows if r.in_top_k]
        rounded = [round(r.prob, HAND_DECIMALS) for r in kept]
        console.print(f"top-{result.top_k} set: {{{', '.join(r.label for r in kept)}}}; by hand "
                      f"{kept[0].label} = {rounded[0]:.3f} / {sum(rounded):.3f} = {rounded[0] / sum(rounded):.3f} "
                      f"(exact {kept[0].top_k_prob:.4f})")
    if result.top_p < 1:
        nucleus = [r for r in rows if r.in_nucleus]
        console.print(f"nucleus at p={result.top_p:g}: {{{', '.join(r.label for r in nucleus)}}} "
                      f"(cumulative {nucleus[-1].cumulative:.3f} >= {result.top_p:g})")
    console.print(f"temperature {result.temperature:g}: p({rows[0].label}) = {rows[0].temperature_prob:.3f} "
                  f"(T=1: {rows[0].prob:.3f})")
    console.print(f"pipeline T={result.temperature:g} → top-k={result.top_k or 'off'} → top-p={result.top_p:g} → "
                  f"min-p={result.min_p:g}: " + ", ".join(f"{r.label} {r.final_prob:.3f}" for r in rows if r.final_prob > 0))


def _colour(prob: float) -> str:
    # Confident tokens green, doubtful ones yellow, long shots red.
    return "green" if prob >= 0.7 else "yellow" if prob >= 0.3 else "red"


def print_inspection(choice: CompletionOutput, console: Console, alternatives: int) -> None:
    """The generated text coloured by each token's final probability, then one line per step."""
    text = Text()
    for step in choice.trace or []:
        chosen = next(c for c in step.candidates if c.token_id == step.chosen_token_id)
        text.append(chosen.text, style=_colour(chosen.final_prob))
    console.print(text)
    console.print()
    for index, step in enumerate(choice.trace or []):
        chosen = next(c for c in step.candidates if c.token_id == step.chosen_token_id)
        others = [c for c in step.candidates if c.token_id != step.chosen_token_id][:alternatives]
        line = Text(f"{index:>4} ")
        line.append(f"{chosen.text!r:<14}", style=_colour(chosen.final_prob))
        line.append(f" p={chosen.final_prob:.3f} raw={chosen.raw_prob:.3f}  kept={step.num_kept}"
                    f" nucleus={step.nucleus_size}  | ")
        line.append("  ".join(f"{c.text!r} {c.raw_prob:.3f}{'' if c.final_prob > 0 else '✗'}" for c in others),
                    style="dim")
        console.print(line)
