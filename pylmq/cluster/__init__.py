"""pylmq.cluster"""
