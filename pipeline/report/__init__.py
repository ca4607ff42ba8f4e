"""Presenting results to people: terminal tables now; markdown and plots later."""
