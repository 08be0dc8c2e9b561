"""pylmq.spark"""
