"""`egg bench`: a session in review mode `auto` for every problem of a suite, one worker per GPU (or Ray tasks),
every result in the store, and the suite's numbers in OUT (results.jsonl, results.csv, report.md)."""
