"""pylmq.client"""
