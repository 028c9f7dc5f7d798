"""Development tools: planted faults and mutation testing. May import anything; nothing imports them.
"""
