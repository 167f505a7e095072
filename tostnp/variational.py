"""(not yet built)"""
