"""The resume core: the model, the formats, the locked read, the envelope, and the
small stdlib-only helpers every layer above shares. Imports nothing above it."""
