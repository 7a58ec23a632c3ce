"""corral.cli"""
