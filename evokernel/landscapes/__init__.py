"""Recorded H200 landscapes shipped as package data; see README.md in this folder."""
