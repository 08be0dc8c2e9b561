"""pylmq.dist"""
