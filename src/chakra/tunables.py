"""Every tunable of the toolkit: the sizes, caps, slacks and tolerances that trade speed, memory or accuracy
for one another.  One line each says what it trades; docs/tunables.md says how each value was chosen (and
what was measured).  Format values, which are fixed by the formats, are in ``chakra.formats``.

The modules import the names they use (``from chakra.tunables import X``); where a test needs a small
value, the function that reads it takes it as a parameter (the tunable is the default) and the test passes it.
"""

from __future__ import annotations

# ---- chakra.io -----------------------------------------------------------------------------------------
AUTO_POOL_MIN_BYTES = 4 << 20      # less input than this runs in one process: a worker's start-up costs more
WRITE_BATCH_BYTES = 1 << 20        # protobuf frames joined per write: fewer calls against more memory
READ_CHUNK_BYTES = 1 << 23         # bytes of a .et read at a time: fewer reads against more memory
DECODE_BATCH_BYTES = 1 << 22       # frames decoded per container message: fewer calls against more memory
JSON_STREAM_MIN_ITEMS = 100_000    # a JSON list this long is written in batches, not as one text in memory
JSON_STREAM_BATCH = 20_000         # items encoded at a time when streaming: fewer calls against more memory
KIND_PEEK_BYTES = 1 << 20          # bytes read to tell a host ET from a Kineto trace: surer against slower
SNIFF_BYTES = 1 << 16              # bytes read to say what a wrong file is: surer against slower
FORK_RESULT_BUFFER_BYTES = 1 << 20  # buffer of a forked part's result file: fewer calls against memory
PATHS_LISTED_MAX = 4               # files / folders named in one message: clearer against longer

# ---- chakra.host, chakra.device --------------------------------------------------------------------------
HOST_PIECES_CACHE_MAX = 200_000    # texts / attribute dicts cached by the host loader: memory against speed
CUT_SEARCH_BYTES = 1 << 16         # bytes read at a time looking for a node boundary where an ET+ is cut
PICKLE_CHUNK_EVENTS = 8192         # events pickled at a time by a forked Kineto loader: memory against copies
CORRUPT_DUR_US = 1e12              # a longer Kineto ``dur`` is corrupt and read as 0 (11.6 days)
NEST_REL_EPS = 5e-16               # relative tolerance (~2 ulp) when nesting Kineto events on a thread
IDS_LISTED_MAX = 5                 # ids quoted in one aggregated message (the count is always given)

# ---- chakra.link -----------------------------------------------------------------------------------------
INTER_THREAD_GAP_US = 1000.0       # an idle gap this long on a thread starts a group with an inter-thread dep
SYNC_STEP_BACK_MAX = 32            # GPU ops stepped over looking for a sync's dependency: work against reach
COMM_ANCESTORS_MAX = 4             # host ancestors of a comm kernel's launch searched for its collective
ALIGN_DP_CELLS = 4096              # the largest window aligned exactly (LCS): exact against quadratic
ALIGN_REPAIR_RADIUS = 24           # matched pairs kept around a gap when re-aligning it
ALIGN_REPAIR_CELLS = 40_000        # the largest window re-aligned exactly around a gap
#: (context K, look-ahead L) tried in order to resynchronise at a mismatch (None: the whole window)
ALIGN_RESYNC_STEPS: tuple[tuple[int, int | None], ...] = ((8, 64), (8, 512), (8, 4096), (3, 4096), (8, None),
                                                          (3, None), (1, None))
PARTIAL_STEP_SHARE = 0.05          # unrecorded ops after a host ET's last op spanning more of a step: cut
WARN_MATCH_RATE = 0.95             # a link matching fewer host (or GPU) ops than this share warns
ETPLUS_WRITE_PIECE_COST = 2_000    # ET+ nodes made per forked piece, in cost units (host node 1, GPU node 2)
ETPLUS_WRITE_FORKED_MAX_NODES = 100_000  # an ET+ of more nodes is made in one process: forks copy pages
MAX_CLOCK_GAP_S = 15 * 3600.0      # a host ET and a Kineto trace further apart than this are different runs
EPOCH_US_MIN = 1e15                # Kineto ``ts`` above this is an epoch clock (checked against the host ET)
STRETCH_MIN_ALIGNED = 0.5          # share of the host thread that must align for a stretch to be taken
STRETCH_GRAMS = (8, 3)             # names per run voting for a repetition's start: surer against rarer
STRETCH_SPANS_MAX = 256            # repetitions aligned at most (each aligns the whole host thread)
STRETCH_PACKED = 64                # matched pairs at each end of an alignment packed towards its middle

# ---- chakra.convert --------------------------------------------------------------------------------------
WAIT_SLACK_US = 500                # how late a blocked thread may resume after what it waited for ended
MIN_WAIT_US = 5                    # shorter waits stay inside the pieces (not worth a dependency)
STREAM_SLACK_US = 20               # a GPU stream waiting on another (an event) starts within this of its end
LONG_WAIT_US = 200                 # a piece this long ending right after another thread's op waited for it
WAKE_US = 50                       # ... "right after": within this
COMM_CHAIN_MAX = 8                 # host ancestors followed up from a communication op (3 in real traces)
CORRUPT_TIME_US = 1e18             # a time beyond this (or NaN, inf) is corrupt (uint64 µs ends at 1.8e19)
DECODE_PIECE_MIN_NODES = 5_000     # a smaller piece of ET+ decoding is not worth a process
DECODE_PART_MIN_BYTES = 4 << 20    # a smaller part of an ET+ file is not worth a process
ATTR_ENTRIES_CACHE_MAX = 10_000    # serialised attrs dicts cached: memory against speed
IO_TAILS_CACHE_MAX = 100_000       # serialised shapes+types cached: memory against speed
ATTR_BLOCKS_CACHE_MAX = 100_000    # serialised attribute blocks cached: memory against speed
ET_WRITE_PIECE_NODES = 30_000      # .et nodes serialised per forked piece (no split below 2x this)
ET_WRITE_READ_PIECE_NODES = 5_000  # the same while the replay's reader decodes the frames as written

# ---- chakra.job ------------------------------------------------------------------------------------------
MATCH_EXHAUSTIVE_PAIRS = 4_000_000  # rank x reference collectives up to which every offset is tried
# maps of a rank's gloo worker threads onto its process groups tried (job.unnamed); more: groups stay unnamed
GLOO_THREAD_MAPS = 20_000
# worker threads of a gloo process group (ProcessGroupGloo's default Options.threads; job.unnamed)
GLOO_GROUP_THREADS = 2
ENDPOINT_DELAY_NS = 10             # the simulator's per-message cost besides latency (measured ~10.5 ns)
NO_LOCAL_MEMORY_GBPS = 1_000_000   # the simulator's local-memory bandwidth: far above any link (adds nothing)
ENVELOPE_SHARE = 1.0               # share of the transfers the fitted network model stays below

# ---- chakra.replay ---------------------------------------------------------------------------------------
READER_ATTRS_MAX = 0xD800          # distinct attribute encodings cached (a character each, below surrogates)
READER_ATTR_STRINGS_MAX = 1 << 16  # distinct attribute strings cached
READER_VALUES_MAX = 4096           # distinct values cached per attribute name read; beyond: decoded in bulk
READER_SKIPS_MAX = 256             # distinct values cached per name not read; beyond: not cached
READER_SPAN_MIN_BYTES = 1 << 20    # a span of a .et worth a process of its own
WHATIF_LATENCY_US = 10.0           # the communication model when nothing fits one: placeholder latency
WHATIF_GBPS = 10.0                 # ... and bandwidth (GB/s: 1e9 bytes/s = 1,000 bytes/µs)
PATH_EPS = 1e-6                    # tolerance (µs) when the critical path compares replayed times
RUN_ON_SHARE = 0.01                # recorded work ending more than this share of the window after it: its end
PROGRESS_REDRAW_S = 0.1            # a whole-job replay's progress bar is redrawn at most this often (seconds)

# ---- chakra.pipeline -------------------------------------------------------------------------------------
TOGETHER_PP = 0.5                  # ranks start together when that moves no rank's replay by more (points)

# ---- chakra.tools, chakra.cli ----------------------------------------------------------------------------
DOT_SECONDS_K = 3.2e-6             # graphviz layout time ~ K x (nodes + edges)^2 s
DRAW_MAX_SECONDS = 30.0            # a drawing estimated to take longer is refused (--max-seconds)
DRAW_MAX_NODES = 2000              # a drawing of more nodes is refused (--max-nodes)
COARSE_BOXES = 60                  # boxes of the coarse view of a whole trace (--coarse)
LABEL_NAME_MAX = 48                # characters of a node's name in its label
COARSE_NAME_MAX = 30               # the same in a coarse box
COARSE_TOP_NAMES = 2               # heaviest ops a coarse box lists
SIGNAL_REARM_S = 0.2               # how often a Ctrl-C that arrived in an import is raised again
