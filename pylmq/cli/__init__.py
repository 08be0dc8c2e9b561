"""pylmq.cli"""
