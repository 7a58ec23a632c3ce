"""corral.web"""
