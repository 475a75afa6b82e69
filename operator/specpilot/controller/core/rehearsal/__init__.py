"""The peak rehearsal: `steps`, its ladder and what each step measured, as pure functions; `tick`, its
part of a pilot tick."""
