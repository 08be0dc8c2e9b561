"""pylmq.api"""
