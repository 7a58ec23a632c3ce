"""corral.model"""
