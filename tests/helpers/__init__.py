"""What several test modules share: builders of small traces and .et files, independent readers and checks,
and the oracles (the implementations a stage replaced, kept to compare against on random inputs).

Test modules import these as ``helpers.<module>`` (tests/ is on sys.path through tests/conftest.py); no test
module imports another test module."""
