"""The machine's other load during a benchmark run: CPU seconds the whole
machine was busy, less those of the run's own child processes."""
import os
import resource


def cpu_busy_seconds():
    """CPU seconds the whole machine has spent busy since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds():
    """CPU seconds this process's finished children have used."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
