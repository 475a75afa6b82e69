"""Judging windows and driving scopes through their stages: pure functions of data and `now`."""
