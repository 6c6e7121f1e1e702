"""Integrations with serving engines."""
