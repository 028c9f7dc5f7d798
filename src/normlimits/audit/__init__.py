"""``normlimits audit`` and what it is made of: the yardsticks, the command, its report, resume cache
and provenance, the architectures survey, ``compare``, the 4-bit round trip, figure files and the
HTML page. Imports every layer below it (not ``book``).
"""
