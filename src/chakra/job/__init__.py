"""Job-level passes: the cross-rank contract of a whole job's Chakra ETs.

Layer: above ``convert`` (it reads the ``.et`` files any converter writes), below
``replay`` (whose whole-job mode couples collectives with the same matcher).
"""
