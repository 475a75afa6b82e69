"""The peak rehearsal: `steps`, where it stands each tick; `ladder`, its planned steps; `figures`, what
each step measured; `manifests`, its objects; `tick`, its part of a pilot tick. All pure."""
