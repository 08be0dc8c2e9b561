"""pylmq.metrics"""
