__all__ = []  # (not yet built)
