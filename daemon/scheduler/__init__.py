"""anyfill.daemon.scheduler"""
