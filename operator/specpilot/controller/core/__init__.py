"""The controller's functional core: pure and typed, no I/O. `plan` turns one snapshot of a pilot
into everything one tick does; the other modules are its parts."""
