"""corral.controller"""
