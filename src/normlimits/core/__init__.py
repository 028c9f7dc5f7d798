"""The foundation every layer may import: settings, devices, input validation, the cache (atomic
writes, checksums, the package digest), the paper's protocol constants, selection and fits, the
bootstrap, text markup, glue, output folders, the repository's paths and the streaming runner the
bench and the audit share. Imports nothing else of the package.
"""
