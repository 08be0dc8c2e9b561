"""pylmq.config"""
